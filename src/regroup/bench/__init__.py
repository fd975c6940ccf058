"""regroup.bench."""
