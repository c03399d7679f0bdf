"""Scraping a broker's Prometheus metrics listener (``metrics.listener``)."""

import re
import urllib.request


def scrape(port):
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    samples = {}
    for line in text.splitlines():
        m = re.match(r'^(\w+)\{([^}]*)\} ([0-9.e+-]+)$', line)
        if m:
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
            samples.setdefault(m.group(1), []).append((labels, float(m.group(3))))
    return text, samples
