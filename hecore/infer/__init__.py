"""Encrypted inference on scikit-learn's digits: the models in plaintext (:mod:`.models`), their
evaluation on ciphertexts in batches (:mod:`.encrypted`) and one sample per ciphertext
(:mod:`.coefficients`, :mod:`.windows`), in the preset's arithmetic (:mod:`.arithmetic`), the
choice among these layouts (:mod:`.layouts`), and the owner's ringers that check the answers (:mod:`.ringers`)."""
