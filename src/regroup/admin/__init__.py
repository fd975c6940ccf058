"""regroup.admin."""
