"""SEAL's backend (CKKS, BFV, BGV through Pyfhel): its parameter presets (:mod:`.params`), the Pyfhel context
and the ``hepix_seal`` extension (:mod:`.native`), a key set's context (:mod:`.context`) and key directories
(:mod:`.keys`), the Galois elements of its whole rotation set (:mod:`.galois`), the evaluator the packed ops run
on (:mod:`.evaluator`), the checks of serialized ciphertexts (:mod:`.checks`), the stored forms at rest
(:mod:`.atrest`), the byte-level kernels of the pixel layout (:mod:`.kernels`) and CKKS's canonical embedding
(:mod:`.embedding`).

It sits beside :mod:`hecore.tfhe`; :mod:`hecore.schemes.seal` presents it to the jobs as a key set.
"""
