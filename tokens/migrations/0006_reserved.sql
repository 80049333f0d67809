-- 6: reserved for another change to the schema, made apart from the
-- approvals (7); this step does nothing. Replace it with that change.
SELECT 1;
