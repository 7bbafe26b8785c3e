"""Operations on encrypted images.  Each image op is one class registered by its name (:mod:`.base`: the
interface and the registry): brightness, contrast and watermark (:mod:`.pointwise`), the mean filter and the
convolutions (:mod:`.windows`), ``grey`` (:mod:`.channels`), ``downsample`` (:mod:`.downsample`) and the
frequency-domain filter (:mod:`.dft`).  :mod:`.spec` parses a chain through the registry and holds the
plaintext reference and what the key holder does after decryption; the pixel layout's byte-level arithmetic
is :mod:`.pixel`, the packed layouts' evaluation :mod:`.packed`; matching (:mod:`.matching`), the 8-bit tables
on packed BFV (:mod:`.lut`) and CKKS's polynomial approximation of a threshold (:mod:`.sign`)."""
