"""How pixels are laid out in ciphertexts: tiles, the pixel layout (a ciphertext per value) and the packed
layouts (a tile channel per ciphertext, one or two pixels per slot)."""
