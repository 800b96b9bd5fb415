;; Not a hook: a table that starts with 2^21 elements (16 MiB of host
;; memory), which paddock refuses at load.
(module
  (table 2097152 funcref)
  (memory 1)
  (func (export "_start")))
