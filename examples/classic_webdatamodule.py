"""Placeholder: a worked example of the classic bionemo-webdatamodule API (`WebDataModule`).

TODO(lead): replaced at merge by the version written with the classic-API fixes.
"""
