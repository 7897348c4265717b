package httpapi

// tagColumns makes a raw column that names a tag of the series read, and no field of
// them, a column of the tag's values: `SELECT "name", driver, fuel_state FROM
// diagnostics …` shows each row's truck and driver, as InfluxDB does. Only raw
// columns shown as they are; a statement whose columns hold no field is left as it is.
func (p *selectPlan) tagColumns() {
	if !p.raw || p.outs != nil {
		return
	}
	fields := 0
	var tags []int
	for i, c := range p.cols {
		if c.tag {
			continue
		}
		field, tag := false, false
		for _, g := range p.groups {
			field = field || len(g.keys[i]) > 0
			for _, s := range g.sets {
				_, ok := s.tags[c.field]
				tag = tag || ok
			}
		}
		switch {
		case field:
			fields++
		case tag:
			tags = append(tags, i)
		}
	}
	if fields == 0 {
		return
	}
	for _, i := range tags {
		p.cols[i].tag = true
		p.tagCols = true
	}
}
