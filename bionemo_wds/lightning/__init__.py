"""bionemo_wds.lightning."""
