"""`python -m accelpipe` runs the CLI."""

import sys

from accelpipe.cli import main

sys.exit(main())
