"""Date and time formats of the portal, the same in every language: ISO 8601 with the time zone.

Django's own locale formats (English "Dec. 1, 2026, 10:15 a.m.", Russian "1 декабря 2026 г. 10:15")
would otherwise win over settings.DATETIME_FORMAT once a language is active.
"""
