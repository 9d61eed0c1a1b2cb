"""The operators' console: service side (I/O), beside the pure placement math in ``placement``.

``events``   what happened, as a bounded, numbered log (pure; the node feeds it)
``summary``  agreement, balance and the compact partition-map payload (pure)
``balancing`` load-aware weights: each member's load and weights, the last plans (pure)
``routes``   the HTTP routes the page and ``placement status`` read: ``/ui``, ``/v1/events``
             (server-sent events or long-poll), ``/v1/map``, ``/v1/checksum``, ``/v1/agreement``,
             ``/v1/balancing``
``status``   ``placement status --url URL``: the same summary in a terminal
``ui/``      the page: hand-written HTML, CSS and one JavaScript module; no build step, no CDN

The page gets its data from the same endpoints a script would use (issue 12).
"""
