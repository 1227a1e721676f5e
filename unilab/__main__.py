import sys

from unilab.cli.main import main

sys.exit(main())
