"""Makes the shared test helpers in this folder (``example_runs``) importable from every test package."""
