"""The API as a contract: a model for every payload wheeld publishes or receives.

``wheeld.contract.topics`` describes what each topic carries,
``wheeld.contract.commands`` the operator commands and their replies, and
``wheeld.contract.asyncapi`` builds from them the AsyncAPI 3 document and the
JSON Schemas in ``docs/api/``; ``python -m wheeld.contract`` rewrites those
files. The daemon never imports this package: it exists for consumers, the
documentation and the tests, which check that real payloads match it.
"""
