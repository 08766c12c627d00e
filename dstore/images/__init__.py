"""Images, shared by every format that stores them: the PNG codec (:mod:`.png`), the
lossy codecs JPEG/WebP/JPEG XL (:mod:`.imagecodec`), pixels in and out of a field's
records (:mod:`.pixels`), the image options every format opts into, declared once
(:mod:`.options`), and decoding encoded image fields to pixels (:mod:`.decoding`).

This floor knows pixels and encodings, not formats: it sits above the model and
the interfaces and below the container and the format packages.
"""
