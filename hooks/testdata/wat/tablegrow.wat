;; Not a hook: grows its table by the export's argument and returns what
;; table.grow returned (the old size, or -1). wazero keeps tables in host
;; memory, so paddock caps them (2^20 elements in all).
(module
  (table 1 funcref)
  (func (export "grow") (param i32) (result i32)
    ref.null func
    local.get 0
    table.grow 0))
