# Empty dependencies file for hora_core.
# This may be replaced when dependencies are built.
