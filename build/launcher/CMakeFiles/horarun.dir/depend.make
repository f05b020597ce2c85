# Empty dependencies file for horarun.
# This may be replaced when dependencies are built.
