"""Encrypted inference on scikit-learn's digits: the models in plaintext (:mod:`.models`), their
evaluation on ciphertexts in batches (:mod:`.encrypted`) and one sample per ciphertext
(:mod:`.coefficients`, :mod:`.windows`), in the preset's arithmetic (:mod:`.arithmetic`), and the
choice among these layouts (:mod:`.layouts`)."""
