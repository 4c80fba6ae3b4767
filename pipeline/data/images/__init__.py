"""Image data from local files only (nothing is downloaded): CIFAR-10/100, CIFAR-10-C, digits
(``data``), and image corruptions at five severities (``corruptions``)."""
