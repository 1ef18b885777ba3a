"""Every message type: frozen pydantic v2 models, tagged unions -- internal.

The messages an application reads (conversation items, session events, turn
and accept results, alerts) are re-exported by :mod:`fore`; the rest are the
protocol between Fore's own actors and may change without notice.
"""
