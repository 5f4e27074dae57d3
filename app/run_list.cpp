// The run list (run_list.h): rows rebuilt from the recording whenever the context says the runs or
// their records changed; a click on a row emits runChosen. Reference: issue 17 item 5 (finding 13).
#include "app/run_list.h"

#include <QStringList>

#include "app/run_controller.h"  // changeFromA, normalizerText

namespace hl::app {

RunList::RunList(QWidget* parent) : QListWidget(parent) {
  setObjectName("runList");
  setSelectionMode(QAbstractItemView::SingleSelection);
  setToolTip(tr("The runs of this recording. Run A is the baseline; each other run changes one setting "
                "from A (the toggles make a new run). Click a run to compare it with A; click A to compare "
                "with nothing."));
  connect(this, &QListWidget::currentRowChanged, this, [this](int row) {
    if (!filling_ && row >= 0) emit runChosen(item(row)->data(Qt::UserRole).toInt());
  });
}

void RunList::setRuns(const hl::Recording* rec, int selected, const hl::Run* compared, const QString& comparedName) {
  filling_ = true;
  clear();
  if (rec && !rec->runs.empty()) {
    const hl::Run& a = rec->runs[0];
    for (size_t i = 0; i < rec->runs.size(); ++i) {
      const hl::Run& r = rec->runs[i];
      const QString what = i == 0 ? tr("baseline (%1, %2 registers)").arg(normalizerText(a.settings)).arg(a.settings.registers_used)
                                  : changeFromA(a.settings, r.settings);
      auto* it = new QListWidgetItem(
          tr("%1 — %2 — %3 tokens").arg(QString::fromStdString(r.label), what).arg(r.records.size()), this);
      it->setData(Qt::UserRole, static_cast<int>(i));
    }
    if (compared) {
      auto* it = new QListWidgetItem(tr("%1:%2 — compared session — %3 tokens")
                                         .arg(comparedName, QString::fromStdString(compared->label))
                                         .arg(compared->records.size()),
                                     this);
      it->setData(Qt::UserRole, -1);
      it->setFlags(it->flags() & ~Qt::ItemIsSelectable);
      it->setSelected(false);
      setCurrentItem(it);
    } else {
      setCurrentRow(selected >= 1 && selected < count() ? selected : 0);
    }
  }
  filling_ = false;
}

QStringList RunList::rowTexts() const {
  QStringList out;
  for (int i = 0; i < count(); ++i) out << item(i)->text();
  return out;
}

}  // namespace hl::app
