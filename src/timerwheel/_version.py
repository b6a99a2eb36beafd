"""The package version, in one place (read by setuptools and by timerwheel.__version__)."""

__version__ = "0.1.0"
