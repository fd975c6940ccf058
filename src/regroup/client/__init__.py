"""regroup.client."""
