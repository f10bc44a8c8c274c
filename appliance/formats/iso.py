"""The formats every language module re-exports (Django's format-file names)."""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
# A point before decimals in every language (392.6, not Russian 392,6): values are read next to their
# limits, exported and sorted by appliance.js, all with a point.
DECIMAL_SEPARATOR = "."
THOUSAND_SEPARATOR = "\u00a0"
NUMBER_GROUPING = 0
