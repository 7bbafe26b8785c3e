"""The ``hepix`` command: one thin module per command at this level (``keygen``, ``plan``, ``encrypt``,
``process``, ``decrypt``, ``verify``, ``audit``, ``match``, ``infer``, ``demo``; :mod:`.cli` parses and
routes), what every job runs on in :mod:`.runtime`, and the code Spark's Python workers run in
:mod:`.tasks`.  No cryptography here: that is :mod:`hecore`'s."""
