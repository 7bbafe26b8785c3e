"""Operations on encrypted images: the op vocabulary and its plaintext reference (:mod:`.spec`), the pixel
layout's byte-level arithmetic (:mod:`.pixel`), the packed layouts' ops (:mod:`.packed`), matching
(:mod:`.matching`), the frequency-domain filter (:mod:`.dft`) and CKKS's polynomial approximation of a
threshold (:mod:`.sign`)."""
