import sys

from bionemo_wds.cli.main import main

sys.exit(main())
