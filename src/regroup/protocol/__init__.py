"""regroup.protocol."""
