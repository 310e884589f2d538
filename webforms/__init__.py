"""Hosted forms behind one-time links: a request's schema rendered as an accessible HTML form."""
