"""regroup.log."""
