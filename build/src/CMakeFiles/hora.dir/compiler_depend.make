# Empty compiler generated dependencies file for hora.
# This may be replaced when dependencies are built.
