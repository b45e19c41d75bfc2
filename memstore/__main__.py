import sys

from .surfaces.entry import main

sys.exit(main())
