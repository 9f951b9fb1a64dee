import sys

from analyzers.cli import main

sys.exit(main())
