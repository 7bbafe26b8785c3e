"""``hepix bench`` and ``hepix report``: the measurements, their tables and the report.  The library
(:mod:`hecore`) never imports anything from here."""
