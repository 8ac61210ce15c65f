"""The API as a contract: a model for every payload wheeld publishes or receives.

``wheeld.contract.registry`` names every topic (its model, retain flag, QoS and
what it is for) and every command (its model and its reply): the daemon's
builders take the retain flag and QoS from it, and it is light (no pydantic) so
the daemon may import it on its way to READY. ``wheeld.contract.topics``
describes what each topic carries, ``wheeld.contract.commands`` the operator
commands and their replies, ``wheeld.contract.lenient`` the followers' view of
those models, and ``wheeld.contract.asyncapi`` builds from the registry the
AsyncAPI 3 document and the JSON Schemas in ``docs/api/``; ``python -m
wheeld.contract`` rewrites those files. The daemon never imports the models:
they exist for consumers, the documentation and the tests, which check that
real payloads match them.
"""
