"""regroup.broker."""
