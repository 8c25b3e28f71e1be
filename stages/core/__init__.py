"""Shared pieces every stage uses: params, ReVOS I/O, RLE geometry, lineage, reports."""
