"""``python -m regroup_pipeline <job> …``."""

import sys

from regroup_pipeline.cli import main

sys.exit(main())
