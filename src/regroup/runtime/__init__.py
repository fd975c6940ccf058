"""regroup.runtime."""
