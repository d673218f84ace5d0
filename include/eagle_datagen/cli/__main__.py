"""`python -m eagle_datagen.cli`, as the tests and benchmarks run it."""

import sys

from eagle_datagen.cli import main

sys.exit(main())
