"""Fore's actors and the services around them -- internal.

The pooled actor runtime (``core``), the worker with its hooks and
interceptors, the tool pool and built-in tools, the LLM gateway and models,
the blob store, file references, previews and ``resolve``, the overlay, the
speculation gate and controller, and the alert sink. Applications use the
public API in :mod:`fore` (and :mod:`fore.testing`, :mod:`fore.lowlevel`);
these modules may change without notice.
"""
