import sys

from costmodel.cli.main import main

sys.exit(main())
