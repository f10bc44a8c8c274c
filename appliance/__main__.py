"""`python -m appliance`: the `appliance` command (appliance/cli.py)."""

import sys

from appliance.cli import main

if __name__ == "__main__":
    sys.argv[0] = "python -m appliance"  # the name Django's usage and help lines show
    main()
