"""Jinja2 templates and static assets of the hosted forms (package data: ``handraise.templates``)."""
