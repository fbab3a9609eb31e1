"""The demo fleet's people and its live fault (load_demo)."""
