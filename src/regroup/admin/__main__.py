"""``python -m regroup.admin ARGS`` runs ``regroup groups ARGS``."""

from regroup.admin.cli import main

raise SystemExit(main())
