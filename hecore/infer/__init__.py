"""Encrypted inference on scikit-learn's digits: the models in plaintext (:mod:`.models`) and their
evaluation on ciphertexts (:mod:`.encrypted`)."""
