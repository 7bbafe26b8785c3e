"""The ``hepix`` command: one thin module per command at this level (``keygen``, ``plan``, ``encrypt``,
``process``, ``decrypt``, ``verify``, ``audit``, ``match``, ``infer``, ``demo``; :mod:`.cli` parses and
routes) and what every job runs on in :mod:`.runtime`: Spark's driver side.  The code Spark's Python
workers run is :mod:`tasks`, which this package imports and which never imports it.  No cryptography here:
that is :mod:`hecore`'s."""
