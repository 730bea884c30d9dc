"""Adapters for code written against other data-module releases."""
