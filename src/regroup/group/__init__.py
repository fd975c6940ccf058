"""regroup.group."""
