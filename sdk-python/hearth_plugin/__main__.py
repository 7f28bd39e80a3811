"""`python -m hearth_plugin run path/to/plugin.py [args...]`: serve a plugin file."""

from ._main import main

if __name__ == "__main__":
    main()
