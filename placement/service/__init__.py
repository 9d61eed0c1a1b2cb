"""The service side: everything that does I/O around the pure placement code in ``placement``.

``node``            the composition root: gossip (``membership``) + placement + ownership cores
``node_config``     ``NodeConfig`` and the gossip key file
``node_mode``       the interface of the two ownership modes: ``node_available``, ``node_exclusive``
``node_ownership``  drives the pure ownership cores (``ownership.core``) with the live view
``node_bridge``     the runner's news to the application's loop (one method per kind)
``membership_log``  the node's rate-limited log lines about other members
``change_stream``   one ``ownership_changes()`` reader's unread changes, merged
``node_thread``     gossip and leases on a thread of their own; ``node_sync`` its blocking API
``loop_lag``        how long the application's loop is blocked (a gauge with no timer)
``node_flags``      the flags of ``placement node``/``witness`` and the ``NodeConfig`` they make
``http_server``     the node's uvicorn server (no tick, the Date header, the bound socket)
``workers``         one task per owned partition (``--worker MODULE:NAME``)
``http_api``        the FastAPI app (``/v1/...``, ``/metrics``); ``guard`` its ownership check
``console``         the operators' console and ``placement status``
``node_cli``        ``placement node | witness | members | owners | cluster`` (the ``placement`` command
                    itself, which gathers these, is ``placement_cli``: it sits above the service)
``node_serve``      runs one node process (HTTP server, reports, graceful leave on SIGTERM)
``work_sink``       the example receiver of ``POST /v1/work`` (``python -m placement.service.work_sink``)

Installed with the ``service`` extra (``pip install 'placement-service[service]'``): fastapi,
uvicorn, prometheus-client, cryptography (gossip encryption) and httpx. Nothing in ``placement``
outside this package imports it, so a Spark executor or a client needs none of them.
"""
