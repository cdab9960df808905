"""Dynamic Resource Allocation: the devices of ResourceSlices, what pending pods' claims ask for,
and how both enter the cache's accounting as resources under ``devices:``.

``demand.py`` reads the objects, ``match.py`` decides which devices a selector picks (``cel.py``
evaluates it), ``inventory.py`` counts free devices per node and the demand of each pending pod,
``feed.py`` takes the informers' updates and ``accounting.py`` applies what they moved to the cache.
"""
