"""An example cpbench backend plugin (docs/backends.md in cpbench).

``specs`` declares the backend without importing torch (cpbench reads it for every command); ``backend`` holds
the class, imported only when the backend runs. Nothing is imported here, so reading the declaration stays light.
"""
