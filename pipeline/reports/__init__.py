"""What is read off evaluated runs: the comparison over seeds (``compare``, ``compare_vision``), the tables
of image benchmarks (``vision_summary``) and the evaluation plots (``plots``). The metrics themselves are
``pipeline.bayes.metrics``; models never compute them.
"""
