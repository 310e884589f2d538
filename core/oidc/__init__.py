"""Signing in to the operator inbox through an OpenID Connect provider (``[oidc]``, core/oidcsettings.py).

``provider.py`` talks to the provider (discovery, keys, the code exchange, the ID token's checks, all
through authlib); ``signin.py`` runs one sign-in from its start to the inbox session of the person it
proves. The pages live in ``webforms/inbox/oidc.py``.
"""
