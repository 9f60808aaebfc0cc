"""Helpers shared by the integration tests: venvs, torchrun runs, traces."""
